/* cmd_keys.c — `crier keys` (create, list and revoke a tenant's API keys;
 * rotate the tenant's secret) and `crier token` (sign a short-lived user
 * token for a person's own feed): the credentials of the HTTP API. */
#include "cli.h"
#include "http_auth.h"
#include "json_writer.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char keys_help[] =
    "usage: crier keys create --tenant T [--name NAME]\n"
    "       crier keys list [--tenant T] [--json]\n"
    "       crier keys revoke ID\n"
    "       crier keys rotate-secret --tenant T\n"
    "\n"
    "API keys let a server call the HTTP API of crier serve for one tenant\n"
    "(Authorization: Bearer crk_…). create prints a new key once, on standard\n"
    "output: only its SHA-256 is stored, so store the key now. list shows keys\n"
    "(id, tenant, name, the key's first characters, created, revoked). revoke\n"
    "refuses a key from the next request on. rotate-secret replaces the tenant's\n"
    "secret, which signs its user tokens and cursors: every token and cursor\n"
    "issued before stops working (API keys are not affected).\n"
    "\n"
    "options:\n"
    "  --tenant T         the tenant\n"
    "  --name NAME        a label for the key (who uses it)\n"
    "  --json             list as one JSON object per line\n" CLI_COMMON_HELP;

static const char token_help[] =
    "usage: crier token --tenant T --user U [--ttl DURATION] [--json]\n"
    "\n"
    "Prints a user token for user U of tenant T: it lets a browser read and change\n"
    "that person's own feed through the HTTP API (Authorization: Bearer cut1.…) and\n"
    "nothing else, until it expires. Signed with the tenant's secret (created on\n"
    "first use). Servers usually get tokens from POST /v1/tokens instead.\n"
    "\n"
    "options:\n"
    "  --tenant T         the tenant\n"
    "  --user U           the person\n"
    "  --ttl DURATION     how long it is valid: 90s, 15m, 2h (default 15m, at most 24h)\n"
    "  --json             print {\"token\", \"user\", \"expires_at\"}\n" CLI_COMMON_HELP;

typedef struct {
    const char *tenant, *name, *user;
    double ttl;
    bool json;
} keys_args;

static int keys_option(void *ud, int opt, const char *arg)
{
    keys_args *a = ud;
    switch (opt) {
    case 't':
        if (!crier_http_valid_id(arg, CRIER_HTTP_ID_MAX)) {
            crier_cli_error("keys",
                            "--tenant must be 1 to %d characters without control characters",
                            CRIER_HTTP_ID_MAX);
            return -1;
        }
        a->tenant = arg;
        return 0;
    case 'n':
        a->name = arg;
        return 0;
    case 'u':
        if (!crier_http_valid_id(arg, CRIER_HTTP_ID_MAX)) {
            crier_cli_error("token", "--user must be 1 to %d characters without control characters",
                            CRIER_HTTP_ID_MAX);
            return -1;
        }
        a->user = arg;
        return 0;
    case 'T':
        if (crier_cli_duration("token", "ttl", arg, &a->ttl) < 0)
            return -1;
        if (a->ttl < 1 || a->ttl > CRIER_USER_TOKEN_MAX_TTL) {
            crier_cli_error("token", "--ttl must be from 1s to 24h, got '%s'", arg);
            return -1;
        }
        return 0;
    case 'j':
        a->json = true;
        return 0;
    }
    return -1;
}

/* Runs a statement; prints the error and returns NULL when it fails. */
static PGresult *keys_exec(const char *cmd, PGconn *conn, const char *sql, int n,
                           const char *const *values)
{
    PGresult *res = PQexecParams(conn, sql, n, NULL, values, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK) {
        crier_cli_error(cmd, "%s(run crier migrate first?)", PQresultErrorMessage(res));
        PQclear(res);
        return NULL;
    }
    return res;
}

static int keys_create(PGconn *conn, const keys_args *a)
{
    char key[CRIER_API_KEY_LEN + 1], hash[65], hint[16];
    const char *values[4];
    PGresult *res;

    if (!a->tenant) {
        crier_cli_error("keys", "create needs --tenant T");
        return 2;
    }
    if (crier_auth_key_generate(key) < 0) {
        crier_cli_error("keys", "no randomness available to generate a key");
        return 1;
    }
    crier_auth_key_hash_hex(key, strlen(key), hash);
    snprintf(hint, sizeof hint, "%.10s", key);
    values[0] = a->tenant;
    values[1] = a->name;
    values[2] = hash;
    values[3] = hint;
    /* the tenant's secret (and row) first: user tokens need it */
    res = keys_exec("keys", conn, "SELECT crier.api_tenant_secret($1) IS NOT NULL", 1, values);
    if (!res)
        return 1;
    PQclear(res);
    res = keys_exec("keys", conn,
                    "INSERT INTO crier.api_keys (tenant, name, key_hash, hint)"
                    " VALUES ($1, $2, decode($3, 'hex'), $4) RETURNING id",
                    4, values);
    if (!res)
        return 1;
    printf("%s\n", key);
    fprintf(
        stderr,
        "created API key %s for tenant %s; it is shown only now: store it (crier keys revoke %s "
        "refuses it)\n",
        PQgetvalue(res, 0, 0), a->tenant, PQgetvalue(res, 0, 0));
    PQclear(res);
    return 0;
}

static int keys_list(PGconn *conn, const keys_args *a)
{
    const char *values[1] = {a->tenant};
    PGresult *res =
        keys_exec("keys", conn,
                  "SELECT id, tenant, coalesce(name, ''), hint || '…', created_at, revoked_at,"
                  " row_to_json(k) FROM (SELECT id, tenant, name, hint, created_at, revoked_at"
                  "   FROM crier.api_keys WHERE $1::text IS NULL OR tenant = $1 ORDER BY id) k",
                  1, values);
    if (!res)
        return 1;
    for (int i = 0; i < PQntuples(res); i++) {
        if (a->json) {
            printf("%s\n", PQgetvalue(res, i, 6));
            continue;
        }
        printf("%s  tenant=%s name=%s key=%s created=%s%s%s\n", PQgetvalue(res, i, 0),
               PQgetvalue(res, i, 1), *PQgetvalue(res, i, 2) ? PQgetvalue(res, i, 2) : "-",
               PQgetvalue(res, i, 3), PQgetvalue(res, i, 4),
               PQgetisnull(res, i, 5) ? "" : " revoked=",
               PQgetisnull(res, i, 5) ? "" : PQgetvalue(res, i, 5));
    }
    if (!a->json)
        fprintf(stderr, "%d key%s\n", PQntuples(res), PQntuples(res) == 1 ? "" : "s");
    PQclear(res);
    return 0;
}

static int keys_revoke(PGconn *conn, const char *id)
{
    const char *values[1] = {id};
    if (!id || !*id || strspn(id, "0123456789") != strlen(id) || strlen(id) > 18) {
        crier_cli_error("keys", "revoke needs a key id (crier keys list shows them)");
        return 2;
    }
    PGresult *res = keys_exec("keys", conn,
                              "UPDATE crier.api_keys SET revoked_at = now() WHERE id = $1::bigint"
                              " AND revoked_at IS NULL RETURNING tenant",
                              1, values);
    if (!res)
        return 1;
    int n = PQntuples(res);
    if (n)
        printf("revoked API key %s of tenant %s\n", id, PQgetvalue(res, 0, 0));
    else
        crier_cli_error("keys", "no active API key %s (crier keys list shows them)", id);
    PQclear(res);
    return n ? 0 : 1;
}

static int keys_rotate(PGconn *conn, const keys_args *a)
{
    const char *values[1] = {a->tenant};
    if (!a->tenant) {
        crier_cli_error("keys", "rotate-secret needs --tenant T");
        return 2;
    }
    PGresult *res =
        keys_exec("keys", conn,
                  "INSERT INTO crier.api_tenants AS t (tenant) VALUES ($1)"
                  " ON CONFLICT (tenant) DO UPDATE SET secret = crier.api_random_secret(),"
                  "   rotated_at = now()",
                  1, values);
    if (!res)
        return 1;
    PQclear(res);
    printf("rotated the secret of tenant %s: its user tokens and cursors issued before no longer "
           "work\n",
           a->tenant);
    return 0;
}

int crier_cmd_keys(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"tenant", required_argument, NULL, 't'},
                                            {"name", required_argument, NULL, 'n'},
                                            {"json", no_argument, NULL, 'j'},
                                            {NULL, 0, NULL, 0}};
    crier_cli cli;
    keys_args a = {0};
    crier_database db;
    int rc = 2;
    const char *action = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;
    const char *arg = NULL;

    crier_cli_init(&cli);
    if (crier_cli_parse(&cli, keys_help, action ? argc - 1 : argc, action ? argv + 1 : argv,
                        options, keys_option, &a, &rc))
        goto out;
    rc = 2;
    if (!action || (strcmp(action, "create") && strcmp(action, "list") &&
                    strcmp(action, "revoke") && strcmp(action, "rotate-secret"))) {
        crier_cli_error(
            "keys",
            "%s: use crier keys create, list, revoke or rotate-secret (see crier keys --help)",
            action ? "unknown action" : "missing action");
        goto out;
    }
    /* optind indexes argv + 1 when an action was given */
    if (!strcmp(action, "revoke") && optind < argc - 1)
        arg = argv[1 + optind++];
    if (optind < argc - 1) {
        crier_cli_error("keys", "unexpected argument '%s' (see crier keys --help)",
                        argv[optind + 1]);
        goto out;
    }
    if (!strcmp(action, "revoke") && !arg) {
        crier_cli_error("keys", "revoke needs a key id (crier keys list shows them)");
        goto out;
    }
    rc = 1;
    PGconn *conn = crier_cli_connect("keys", &cli, &db);
    if (!conn)
        goto out;
    if (!strcmp(action, "create"))
        rc = keys_create(conn, &a);
    else if (!strcmp(action, "list"))
        rc = keys_list(conn, &a);
    else if (!strcmp(action, "revoke"))
        rc = keys_revoke(conn, arg);
    else
        rc = keys_rotate(conn, &a);
    PQfinish(conn);
    crier_database_close(&db);
out:
    crier_cli_free(&cli);
    return rc;
}

int crier_cmd_token(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"tenant", required_argument, NULL, 't'},
                                            {"user", required_argument, NULL, 'u'},
                                            {"ttl", required_argument, NULL, 'T'},
                                            {"json", no_argument, NULL, 'j'},
                                            {NULL, 0, NULL, 0}};
    crier_cli cli;
    keys_args a = {.ttl = 900};
    crier_database db;
    unsigned char secret[CRIER_HTTP_SECRET_MAX];
    long secret_len = 0;
    int rc = 2;

    crier_cli_init(&cli);
    if (crier_cli_parse(&cli, token_help, argc, argv, options, keys_option, &a, &rc))
        goto out;
    rc = 2;
    if (optind < argc) {
        crier_cli_error("token", "unexpected argument '%s' (see crier token --help)", argv[optind]);
        goto out;
    }
    if (!a.tenant || !a.user) {
        crier_cli_error("token", "--tenant and --user are required (see crier token --help)");
        goto out;
    }
    rc = 1;
    PGconn *conn = crier_cli_connect("token", &cli, &db);
    if (!conn)
        goto out;
    const char *values[1] = {a.tenant};
    PGresult *res =
        keys_exec("token", conn, "SELECT encode(crier.api_tenant_secret($1), 'hex')", 1, values);
    if (res) {
        const char *hex = PQgetvalue(res, 0, 0);
        size_t len = strlen(hex);
        if (len % 2 == 0 && len / 2 <= sizeof secret) {
            for (size_t i = 0; i < len / 2; i++) {
                unsigned v;
                sscanf(hex + 2 * i, "%2x", &v);
                secret[i] = (unsigned char)v;
            }
            secret_len = (long)(len / 2);
        }
        PQclear(res);
    }
    if (secret_len > 0) {
        time_t exp = time(NULL) + (time_t)a.ttl;
        char *token =
            crier_auth_token_sign(secret, (size_t)secret_len, a.tenant, a.user, (long long)exp);
        if (a.json) {
            char expires[40];
            struct tm tm;
            crier_json_buf out = {0};
            gmtime_r(&exp, &tm);
            strftime(expires, sizeof expires, "%Y-%m-%dT%H:%M:%SZ", &tm);
            crier_json_buf_puts(&out, "{\"token\":");
            crier_json_buf_string(&out, token);
            crier_json_buf_puts(&out, ",\"user\":");
            crier_json_buf_string(&out, a.user);
            crier_json_buf_printf(&out, ",\"expires_at\":\"%s\"}", expires);
            printf("%s\n", out.data);
            crier_json_buf_free(&out);
        } else {
            printf("%s\n", token);
        }
        free(token);
        rc = 0;
    } else if (rc == 1) {
        crier_cli_error("token", "cannot read the tenant's secret");
    }
    PQfinish(conn);
    crier_database_close(&db);
out:
    crier_cli_free(&cli);
    return rc;
}
