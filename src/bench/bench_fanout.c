/* bench_fanout.c — `crier bench fanout`: crier's fan-out insert path (key hashing
 * in C, array encoding, one INSERT … SELECT FROM unnest … ON CONFLICT DO NOTHING
 * RETURNING per batch) against a raw COPY of the same rows into an identical
 * table on the same cluster. Runs both several times, alternating, and reports
 * medians, the ratio, and the spread as a noise figure. */
#include "bench.h"
#include "alloc.h"
#include "bench_util.h"
#include "cli.h"
#include "clock.h"
#include "keys.h"
#include "log.h"
#include "migrate.h"
#include "pg_array.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char bench_fanout_help[] =
    "usage: crier bench fanout [--events N] [--recipients M] [--batch B] [--repeat R] [--json]\n"
    "                          [--database URL | --data-dir DIR]\n"
    "\n"
    "Inserts N events x M recipients notification rows the way the engine does\n"
    "(keys hashed in C, one unnest statement per batch of B events, ON CONFLICT DO\n"
    "NOTHING RETURNING) and, beside it, COPYs the same rows into an identical table.\n"
    "Also measures the same insert with the unique index on the readable text key\n"
    "instead of the 128-bit hash, and a full retry of the batch (every row a\n"
    "conflict). Repeats R times (alternating), prints medians and the spread.\n"
    "Uses a fresh database crier_bench on the embedded cluster by default.\n"
    "Defaults: N=20000, M=5, B=500, R=5.\n";

typedef struct {
    int events, recipients, batch, repeat;
    bool json;
} bench_opts;

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, crier_bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Spread of a sample as (max - min) / median, in percent. */
static double spread(double *v, int n)
{
    double m = median(v, n);
    return m > 0 ? 100.0 * (v[n - 1] - v[0]) / m : 0;
}

#define BENCH_TENANT "acme"
#define BENCH_TYPE "invoice.created"

/* The engine's notification insert, aimed at a bench table. */
static const char *bench_insert_sql(const char *table)
{
    static char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO crier_bench.%s AS n (key_hash, key, event_id, tenant, event_type,"
             " entity_id, recipient_id, discriminator, rules_version)"
             " SELECT p.*, $9 FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[],"
             " $6::text[], $7::text[], $8::text[])"
             " AS p(key_hash, key, event_id, tenant, event_type, entity_id, recipient_id, discriminator)"
             " ON CONFLICT DO NOTHING RETURNING n.id, n.key_hash",
             table);
    return sql;
}

/* One notification row of the bench: ids and both key forms, computed the way
 * the engine computes them. */
typedef struct {
    char entity[64], recipient[64], key[256], uuid[CRIER_KEY_UUID_LEN + 1];
    size_t key_len;
    uint8_t hash[CRIER_KEY_HASH_LEN];
} bench_row;

/* Fills row for recipient r of event e. */
static void bench_row_make(int e, int r, bench_row *row)
{
    snprintf(row->entity, sizeof row->entity, "inv_%d", e);
    snprintf(row->recipient, sizeof row->recipient, "user_%d", r);
    crier_key_parts kp = {BENCH_TENANT, BENCH_TYPE, row->entity, row->recipient, NULL};
    crier_key_hash(&kp, row->hash);
    crier_key_hash_uuid(row->hash, row->uuid);
    row->key_len = crier_key_readable(&kp, row->key, sizeof row->key);
}

/* One pass of the crier path over all rows; returns rows/s or -1. *inserted
 * receives how many rows came back as new. */
static double bench_crier_pass(PGconn *conn, const bench_opts *o, const char *table, long long first_event,
                               long *inserted)
{
    static const uint32_t types[8] = {CRIER_PG_UUID, CRIER_PG_TEXT, CRIER_PG_INT8, CRIER_PG_TEXT,
                                      CRIER_PG_TEXT, CRIER_PG_TEXT, CRIER_PG_TEXT, CRIER_PG_TEXT};
    crier_pg_array cols[8] = {0};
    crier_pg_params params;
    bench_row row;
    const char *sql = bench_insert_sql(table);
    double t0 = crier_clock_s();
    long rows = 0;

    *inserted = 0;
    for (int b = 0; b < o->events; b += o->batch) {
        for (int c = 0; c < 8; c++)
            crier_pg_array_begin(&cols[c], types[c]);
        for (int e = b; e < b + o->batch && e < o->events; e++) {
            for (int r = 0; r < o->recipients; r++) {
                bench_row_make(e, r, &row);
                crier_pg_array_add_uuid(&cols[0], row.hash);
                crier_pg_array_add_text(&cols[1], row.key, row.key_len);
                crier_pg_array_add_int64(&cols[2], first_event + e);
                crier_pg_array_add_str(&cols[3], BENCH_TENANT);
                crier_pg_array_add_str(&cols[4], BENCH_TYPE);
                crier_pg_array_add_str(&cols[5], row.entity);
                crier_pg_array_add_str(&cols[6], row.recipient);
                crier_pg_array_add_null(&cols[7]);
                rows++;
            }
        }
        crier_pg_params_reset(&params);
        for (int c = 0; c < 8; c++)
            crier_pg_params_array(&params, &cols[c]);
        crier_pg_params_text(&params, "bench");
        PGresult *res = PQexecParams(conn, sql, params.n, NULL, params.values, params.lengths, params.formats, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            crier_cli_error("bench", "insert failed: %s", PQresultErrorMessage(res));
            PQclear(res);
            rows = -1;
            break;
        }
        *inserted += PQntuples(res);
        PQclear(res);
    }
    for (int c = 0; c < 8; c++)
        crier_pg_array_free(&cols[c]);
    if (rows < 0)
        return -1;
    return (double)rows / (crier_clock_s() - t0);
}

/* Builds the COPY text of the same rows (outside the timed region). */
static char *bench_copy_text(const bench_opts *o, long long first_event, size_t *len)
{
    size_t cap = (size_t)o->events * (size_t)o->recipients * 200 + 1, n = 0;
    char *buf = crier_xmalloc(cap);
    bench_row row;
    for (int e = 0; e < o->events; e++) {
        for (int r = 0; r < o->recipients; r++) {
            bench_row_make(e, r, &row);
            /* Keys of this bench hold no tab, newline or backslash: no COPY escaping needed. */
            n += (size_t)snprintf(buf + n, cap - n, "%s\t%s\t%lld\t%s\t%s\t%s\t%s\t\\N\tbench\n", row.uuid,
                                  row.key, first_event + e, BENCH_TENANT, BENCH_TYPE, row.entity, row.recipient);
        }
    }
    *len = n;
    return buf;
}

static double bench_copy_pass(PGconn *conn, const char *text, size_t len, long rows)
{
    double t0 = crier_clock_s();
    PGresult *res = PQexec(conn, "COPY crier_bench.n_copy (key_hash, key, event_id, tenant, event_type, entity_id,"
                                 " recipient_id, discriminator, rules_version) FROM STDIN");
    if (PQresultStatus(res) != PGRES_COPY_IN) {
        crier_cli_error("bench", "COPY failed: %s", PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    PQclear(res);
    for (size_t off = 0; off < len; off += 1 << 20) {
        size_t chunk = len - off < (1u << 20) ? len - off : (1u << 20);
        if (PQputCopyData(conn, text + off, (int)chunk) != 1) {
            crier_cli_error("bench", "COPY failed: %s", PQerrorMessage(conn));
            return -1;
        }
    }
    if (PQputCopyEnd(conn, NULL) != 1) {
        crier_cli_error("bench", "COPY failed: %s", PQerrorMessage(conn));
        return -1;
    }
    res = PQgetResult(conn);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        crier_cli_error("bench", "COPY failed: %s", PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    PQclear(res);
    while ((res = PQgetResult(conn)) != NULL)
        PQclear(res);
    return (double)rows / (crier_clock_s() - t0);
}

static int bench_option(void *ud, int opt, const char *arg)
{
    bench_opts *o = ud;
    switch (opt) {
    case 'e': return crier_cli_positive_int("bench", "events", arg, 100000000, &o->events);
    case 'r': return crier_cli_positive_int("bench", "recipients", arg, 100000, &o->recipients);
    case 'b': return crier_cli_positive_int("bench", "batch", arg, 100000, &o->batch);
    case 'n': return crier_cli_positive_int("bench", "repeat", arg, 1000, &o->repeat);
    case 'j': o->json = true; return 0;
    }
    return -1;
}

int crier_bench_fanout(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"events", required_argument, NULL, 'e'},
                                            {"recipients", required_argument, NULL, 'r'},
                                            {"batch", required_argument, NULL, 'b'},
                                            {"repeat", required_argument, NULL, 'n'},
                                            {"json", no_argument, NULL, 'j'},
                                            {NULL, 0, NULL, 0}};
    bench_opts o = {20000, 5, 500, 5, false};
    crier_cli cli;
    crier_database db = {0};
    PGconn *conn = NULL;
    char err[4096], conninfo[2400];
    char *copy_text = NULL;
    size_t copy_len = 0;
    double *crier = NULL, *copy = NULL, *textkey = NULL, *retry = NULL;
    int rc = 2;

    crier_cli_init(&cli);
    if (crier_cli_parse(&cli, bench_fanout_help, argc, argv, options, bench_option, &o, &rc))
        goto out;
    rc = 1;
    if (crier_database_open(cli.database, cli.data_dir, false, &db, err, sizeof err) < 0) {
        crier_cli_error("bench", "%s", err);
        goto out;
    }
    snprintf(conninfo, sizeof conninfo, "%s", db.conninfo);
    if (db.embedded) { /* as the superuser: the benchmarks load extensions and reset statistics */
        conn = PQconnectdb(db.admin_conninfo);
        if (PQstatus(conn) != CONNECTION_OK || crier_bench_exec(conn, "SET client_min_messages = warning") < 0 ||
            crier_bench_exec(conn, "DROP DATABASE IF EXISTS crier_bench WITH (FORCE)") < 0 ||
            crier_bench_exec(conn, "CREATE DATABASE crier_bench") < 0) {
            crier_cli_error("bench", "cannot create database crier_bench: %s", PQerrorMessage(conn));
            goto out;
        }
        PQfinish(conn);
        conn = NULL;
        snprintf(conninfo, sizeof conninfo, "%s dbname=crier_bench", db.admin_conninfo);
    }
    if (crier_migrate_run(conninfo, NULL, err, sizeof err) < 0) {
        crier_cli_error("bench", "%s", err);
        goto out;
    }
    conn = PQconnectdb(conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        crier_cli_error("bench", "cannot connect: %s", PQerrorMessage(conn));
        goto out;
    }
    /* Three identical tables (the engine's notifications table without its
     * foreign key), the third with its unique index on the readable key. */
    if (crier_bench_exec(conn, "SET client_min_messages = warning") < 0 ||
        crier_bench_exec(conn, "DROP SCHEMA IF EXISTS crier_bench CASCADE") < 0 ||
        crier_bench_exec(conn, "CREATE SCHEMA crier_bench") < 0 ||
        crier_bench_exec(conn, "CREATE TABLE crier_bench.n_crier (LIKE crier.notifications INCLUDING ALL)") < 0 ||
        crier_bench_exec(conn, "CREATE TABLE crier_bench.n_copy (LIKE crier.notifications INCLUDING ALL)") < 0 ||
        crier_bench_exec(conn, "CREATE TABLE crier_bench.n_text (LIKE crier.notifications INCLUDING DEFAULTS)") < 0 ||
        crier_bench_exec(conn, "ALTER TABLE crier_bench.n_text ADD PRIMARY KEY (id), ADD UNIQUE (key)") < 0 ||
        crier_bench_exec(conn, "CREATE INDEX ON crier_bench.n_text (event_id)") < 0 ||
        crier_bench_exec(conn, "CREATE INDEX ON crier_bench.n_text (tenant, recipient_id, id)") < 0)
        goto out;

    long rows = (long)o.events * o.recipients;
    copy_text = bench_copy_text(&o, 1, &copy_len);
    crier = crier_xcalloc((size_t)o.repeat, sizeof *crier);
    copy = crier_xcalloc((size_t)o.repeat, sizeof *copy);
    textkey = crier_xcalloc((size_t)o.repeat, sizeof *textkey);
    retry = crier_xcalloc((size_t)o.repeat, sizeof *retry);
    if (!o.json)
        fprintf(stderr, "bench fanout: %d events x %d recipients = %ld rows, batches of %d events, %d runs\n",
                o.events, o.recipients, rows, o.batch, o.repeat);
    for (int i = 0; i < o.repeat; i++) {
        long inserted;
        if (crier_bench_exec(conn, "TRUNCATE crier_bench.n_crier, crier_bench.n_copy, crier_bench.n_text") < 0 ||
            crier_bench_exec(conn, "CHECKPOINT") < 0)
            goto out;
        /* Alternate the order so that neither side always runs on a warmer cache. */
        if (i % 2 == 0) {
            crier[i] = bench_crier_pass(conn, &o, "n_crier", 1, &inserted);
            copy[i] = bench_copy_pass(conn, copy_text, copy_len, rows);
        } else {
            copy[i] = bench_copy_pass(conn, copy_text, copy_len, rows);
            crier[i] = bench_crier_pass(conn, &o, "n_crier", 1, &inserted);
        }
        if (crier[i] < 0 || copy[i] < 0)
            goto out;
        if (inserted != rows) {
            crier_cli_error("bench", "expected %ld new rows, got %ld", rows, inserted);
            goto out;
        }
        retry[i] = bench_crier_pass(conn, &o, "n_crier", 1, &inserted);
        if (retry[i] < 0 || inserted != 0) {
            crier_cli_error("bench", "the retry pass inserted %ld rows; expected none", inserted);
            goto out;
        }
        textkey[i] = bench_crier_pass(conn, &o, "n_text", 1, &inserted);
        if (textkey[i] < 0)
            goto out;
        if (!o.json)
            fprintf(stderr, "  run %d: crier %.0f rows/s, copy %.0f rows/s, retry %.0f rows/s, text-key %.0f rows/s\n",
                    i + 1, crier[i], copy[i], retry[i], textkey[i]);
    }
    {
        double m_crier = median(crier, o.repeat), m_copy = median(copy, o.repeat);
        double m_retry = median(retry, o.repeat), m_text = median(textkey, o.repeat);
        double noise = spread(crier, o.repeat), noise_copy = spread(copy, o.repeat);
        if (o.json) {
            printf("{\"crier_rows_per_s\": %.0f, \"copy_rows_per_s\": %.0f, \"ratio\": %.3f, "
                   "\"crier_retry_rows_per_s\": %.0f, \"crier_text_key_rows_per_s\": %.0f, "
                   "\"uuid_vs_text_key\": %.3f, \"rows\": %ld, \"runs\": %d, "
                   "\"crier_spread_pct\": %.1f, \"copy_spread_pct\": %.1f}\n",
                   m_crier, m_copy, m_crier / m_copy, m_retry, m_text, m_crier / m_text, rows, o.repeat, noise,
                   noise_copy);
        } else {
            printf("crier_rows_per_s: %.0f\n", m_crier);
            printf("copy_rows_per_s: %.0f\n", m_copy);
            printf("ratio: %.3f\n", m_crier / m_copy);
            printf("crier_retry_rows_per_s: %.0f\n", m_retry);
            printf("crier_text_key_rows_per_s: %.0f\n", m_text);
            printf("uuid_vs_text_key: %.3f\n", m_crier / m_text);
            printf("rows: %ld\nruns: %d\n", rows, o.repeat);
            printf("crier_spread_pct: %.1f\ncopy_spread_pct: %.1f\n", noise, noise_copy);
        }
    }
    rc = 0;
out:
    free(crier);
    free(copy);
    free(textkey);
    free(retry);
    free(copy_text);
    if (conn)
        PQfinish(conn);
    crier_database_close(&db);
    crier_cli_free(&cli);
    return rc;
}
