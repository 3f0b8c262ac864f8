/* cli.c — common flags, environment fallbacks and helpers of the subcommands (see cli.h). */
#include "cli.h"
#include "alloc.h"
#include "migrate.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

void crier_cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "crier %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int crier_cli_set(crier_cli *cli, const char *name_value)
{
    const char *eq = strchr(name_value, '=');
    if (!eq || eq == name_value) {
        fprintf(stderr, "crier: --set expects NAME=VALUE, got '%s'\n", name_value);
        return -1;
    }
    size_t name_len = (size_t)(eq - name_value);
    for (size_t i = 0; i < cli->n_settings; i++) {
        if (strlen(cli->settings[i].name) == name_len && !strncmp(cli->settings[i].name, name_value, name_len)) {
            char *copy = crier_xstrdup(name_value);
            copy[name_len] = '\0';
            free(cli->setting_storage[i]);
            cli->setting_storage[i] = copy;
            cli->settings[i].name = copy;
            cli->settings[i].value = copy + name_len + 1;
            return 0;
        }
    }
    if (cli->n_settings == CRIER_MAX_SETTINGS) {
        fprintf(stderr, "crier: too many settings (at most %d)\n", CRIER_MAX_SETTINGS);
        return -1;
    }
    char *copy = crier_xstrdup(name_value);
    copy[name_len] = '\0';
    cli->setting_storage[cli->n_settings] = copy;
    cli->settings[cli->n_settings].name = copy;
    cli->settings[cli->n_settings].value = copy + name_len + 1;
    cli->n_settings++;
    return 0;
}

void crier_cli_init(crier_cli *cli)
{
    memset(cli, 0, sizeof *cli);
    cli->rules_dir = getenv("CRIER_RULES");
    cli->rules_given = cli->rules_dir && *cli->rules_dir;
    if (!cli->rules_given)
        cli->rules_dir = crier_cli_bundled_rules();
    cli->lua_dir = getenv("CRIER_LUA_DIR");
    cli->lua_dir_given = cli->lua_dir && *cli->lua_dir;
    if (!cli->lua_dir_given)
        cli->lua_dir = crier_cli_install_paths()->lua_dir;
    for (char **e = environ; *e; e++) {
        if (!strncmp(*e, "CRIER_SET_", 10))
            crier_cli_set(cli, *e + 10);
    }
}

/* Handles a common option. Returns 1 if opt was one, 0 if not, -1 on a bad
 * value (message printed to stderr). */
static int cli_option(crier_cli *cli, int opt, const char *arg)
{
    switch (opt) {
    case CLI_OPT_DATABASE:
        cli->database = arg;
        return 1;
    case CLI_OPT_DATA_DIR:
        cli->data_dir = arg;
        return 1;
    case CLI_OPT_RULES_DATABASE:
        cli->rules_database = arg;
        return 1;
    case CLI_OPT_ALLOW_PRIVILEGED_RULE_QUERIES:
        cli->allow_privileged_rule_queries = true;
        return 1;
    case CLI_OPT_RULES:
        cli->rules_dir = arg;
        cli->rules_given = true;
        return 1;
    case CLI_OPT_LUA_DIR:
        cli->lua_dir = arg;
        cli->lua_dir_given = true;
        return 1;
    case CLI_OPT_SET:
        return crier_cli_set(cli, arg) == 0 ? 1 : -1;
    case CLI_OPT_HELP:
        cli->help = true;
        return 1;
    case CLI_OPT_CONFIG: /* read before the flags (crier_cli_parse) */
        return 1;
    default:
        return 0;
    }
}

crier_rules_query_role crier_cli_rule_query_role(const crier_cli *cli)
{
    return cli->allow_privileged_rule_queries ? CRIER_RULES_QUERY_ALLOW_PRIVILEGED : CRIER_RULES_QUERY_UNPRIVILEGED;
}

void crier_cli_free(crier_cli *cli)
{
    for (size_t i = 0; i < cli->n_settings; i++)
        free(cli->setting_storage[i]);
    cli->n_settings = 0;
    crier_cli_config_free(cli->config_argv);
    cli->config_argv = NULL;
}

crier_rules *crier_cli_load_rules(const crier_cli *cli)
{
    char err[16384];
    crier_rules *rules;
    if (crier_cli_require_lua_dir(NULL, cli) < 0)
        return NULL;
    rules = crier_rules_load(cli->lua_dir, cli->rules_dir, cli->settings, cli->n_settings, err, sizeof err);
    if (!rules)
        fprintf(stderr, "%s%s", err, err[0] && err[strlen(err) - 1] != '\n' ? "\n" : "");
    return rules;
}

/* Says what was wrong with the word of argv that getopt_long refused (opt
 * '?': unknown, ambiguous, or a value given to a switch; ':' a value missing),
 * in a few lines that end by pointing at --help. */
static void cli_refused(const char *cmd, int opt, char **argv, const struct option *options)
{
    const char *word = argv[optind - 1];
    char short_opt[3] = {'-', (char)optopt, '\0'};
    if (strncmp(word, "--", 2) != 0 && optopt > ' ' && optopt < 127)
        word = short_opt; /* in a cluster such as -xy, optind has not moved on yet */
    if (opt == ':') {
        fprintf(stderr, "crier %s: %s needs a value\ncrier %s --help says what it takes\n", cmd, word, cmd);
        return;
    }
    if (optopt != 0 && !strncmp(word, "--", 2)) {
        /* a known long option that takes no value, given one */
        for (const struct option *o = options; o->name; o++) {
            if (o->val == optopt && o->has_arg == no_argument) {
                fprintf(stderr, "crier %s: --%s is a switch and takes no value (got '%s')\n"
                                "crier %s --help lists the options\n",
                        cmd, o->name, word, cmd);
                return;
            }
        }
    }
    crier_cli_unknown_option(cmd, word, options);
}

PGconn *crier_cli_connect(const char *cmd, const crier_cli *cli, crier_database *db)
{
    char err[4096];
    PGconn *conn;

    if (crier_database_open(cli->database, cli->data_dir, false, db, err, sizeof err) < 0) {
        crier_cli_error(cmd, "%s", err);
        return NULL;
    }
    conn = PQconnectdb(db->conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        crier_cli_error(cmd, "cannot connect: %s", PQerrorMessage(conn));
        goto fail;
    }
    if (crier_migrate_check(conn, err, sizeof err) < 0) {
        crier_cli_error(cmd, "%s", err);
        goto fail;
    }
    return conn;
fail:
    PQfinish(conn);
    crier_database_close(db);
    return NULL;
}

/* One getopt_long pass over argv. Returns 0, or 1 with *rc set. */
static int cli_parse_pass(crier_cli *cli, const char *cmd, int argc, char **argv,
                          const struct option *options, crier_cli_opt_fn on_opt, void *ud, int *rc)
{
    int opt;

    optind = 0; /* a fresh scan (glibc re-initialises on 0) */
    opterr = 0; /* cli_refused says what was wrong */
    while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        int r;
        if (opt == '?' || opt == ':') {
            cli_refused(cmd, opt, argv, options);
            *rc = 2;
            return 1;
        }
        r = cli_option(cli, opt, optarg);
        if (r == 0 && on_opt)
            r = on_opt(ud, opt, optarg) == 0 ? 1 : -1;
        if (r <= 0) {
            *rc = 2;
            return 1;
        }
    }
    return 0;
}

/* The config file named by --config FILE / --config=FILE, else CRIER_CONFIG. */
static const char *cli_config_path(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            return argv[i + 1];
        if (!strncmp(argv[i], "--config=", 9))
            return argv[i] + 9;
    }
    const char *env = getenv("CRIER_CONFIG");
    return env && *env ? env : NULL;
}

/* The command's name for messages, from its usage line ("usage: crier bench
 * feed [--x]" gives "bench feed"; "crier dead list|replay" gives "dead"). */
static void cli_command_name(const char *help, char *out, size_t len)
{
    const char *p = strstr(help, "crier ");
    size_t n = 0;
    out[0] = '\0';
    if (!p)
        return;
    p += 6;
    for (int word = 0; word < 2 && *p >= 'a' && *p <= 'z'; word++) {
        size_t w = strspn(p, "abcdefghijklmnopqrstuvwxyz-");
        if (word > 0 && p[w] != ' ' && p[w] != '\n' && p[w] != '\0')
            break; /* "list|replay": alternatives, not a subcommand */
        if (n + w + 2 > len)
            break;
        if (n)
            out[n++] = ' ';
        memcpy(out + n, p, w);
        n += w;
        out[n] = '\0';
        p += w;
        if (*p != ' ')
            break;
        p++;
    }
}

int crier_cli_parse(crier_cli *cli, const char *help, int argc, char **argv, const struct option *options,
                    crier_cli_opt_fn on_opt, void *ud, int *rc)
{
    const char *config = cli_config_path(argc, argv);
    char name[64];
    const char *cmd;

    cli_command_name(help, name, sizeof name);
    cmd = name[0] ? name : argv[0];
    if (config) {
        int config_argc;
        crier_cli_config_free(cli->config_argv);
        cli->config_argv = NULL;
        if (crier_cli_config_read(cmd, config, options, &cli->config_argv, &config_argc) < 0) {
            *rc = 2;
            return 1;
        }
        if (cli_parse_pass(cli, cmd, config_argc, cli->config_argv, options, on_opt, ud, rc)) {
            crier_cli_error(cmd, "(that value came from the config file %s)", config);
            return 1;
        }
    }
    if (cli_parse_pass(cli, cmd, argc, argv, options, on_opt, ud, rc))
        return 1;
    if (cli->help) {
        fputs(help, stdout);
        crier_cli_print_paths(stdout, cli);
        *rc = 0;
        return 1;
    }
    return 0;
}

int crier_cli_positive_int(const char *cmd, const char *name, const char *arg, long max, int *out)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (*arg == '\0' || *end != '\0' || v <= 0 || v > max) {
        crier_cli_error(cmd, "--%s expects a whole number from 1 to %ld, got '%s'", name, max, arg);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int crier_cli_duration(const char *cmd, const char *name, const char *arg, double *seconds)
{
    char *end;
    double v = strtod(arg, &end);
    double unit = 1;
    if (end != arg && !strcmp(end, "ms")) {
        unit = 0.001;
        end += 2;
    } else if (end != arg && end[0] && !end[1]) {
        switch (*end) {
        case 's': unit = 1; end++; break;
        case 'm': unit = 60; end++; break;
        case 'h': unit = 3600; end++; break;
        case 'd': unit = 86400; end++; break;
        }
    }
    if (end == arg || *end != '\0' || !(v > 0) || v * unit > 3.2e8) {
        crier_cli_error(cmd, "--%s expects a positive duration such as 30, 1.5s, 250ms, 10m, 2h or 5d, got '%s'", name,
                        arg);
        return -1;
    }
    *seconds = v * unit;
    return 0;
}

char *crier_cli_read_file(const char *path)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    size_t cap = 4096, len = 0, n;
    char *buf;

    if (!f)
        return NULL;
    buf = malloc(cap);
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap) {
            char *p = realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                buf = NULL;
                errno = ENOMEM;
                break;
            }
            buf = p;
            cap *= 2;
        }
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
        errno = EIO;
    }
    if (f != stdin)
        fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}
