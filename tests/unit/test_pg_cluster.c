/* test_pg_cluster.c — starts, restarts, kills and stops real private PostgreSQL
 * clusters in fresh temporary directories (see pg_cluster.h): idempotent start,
 * reuse of an initdb'd directory, a stale postmaster.pid after kill -9, a data
 * directory path too long for a unix socket, quoting of paths with spaces, and
 * the errors for missing binaries and (as root) untraversable parents. */
#define _GNU_SOURCE
#include "pg_cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int failures;

/* On failure: report, count, and jump to the test's cleanup label. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
            goto cleanup;                                                                          \
        }                                                                                          \
    } while (0)

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_rf(const char *path)
{
    nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

/* A fresh directory under /tmp that the server user (postgres, when we are
 * root) can traverse. */
static int make_base(char *out, size_t out_len)
{
    snprintf(out, out_len, "/tmp/crier-pgtest-XXXXXX");
    if (!mkdtemp(out)) {
        perror("mkdtemp");
        return -1;
    }
    if (chmod(out, 0755) < 0) {
        perror("chmod");
        return -1;
    }
    return 0;
}

/* Runs "SELECT <expr>" on a new connection; writes the value into out. Returns
 * 0 on success, -1 if the connection or query failed. */
static int query_value(const char *conninfo, const char *sql, char *out, size_t out_len)
{
    PGconn *conn = PQconnectdb(conninfo);
    PGresult *res = NULL;
    int rc = -1;

    if (PQstatus(conn) != CONNECTION_OK)
        goto cleanup;
    res = PQexec(conn, sql);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        snprintf(out, out_len, "%s", PQgetvalue(res, 0, 0));
        rc = 0;
    } else if (PQresultStatus(res) == PGRES_COMMAND_OK) {
        out[0] = '\0';
        rc = 0;
    } else {
        fprintf(stderr, "query %s: %s", sql, PQerrorMessage(conn));
    }
cleanup:
    if (res)
        PQclear(res);
    PQfinish(conn);
    return rc;
}

static int can_connect(const char *conninfo)
{
    PGconn *conn = PQconnectdb(conninfo);
    int ok = PQstatus(conn) == CONNECTION_OK;

    PQfinish(conn);
    return ok;
}

/* First line of datadir/postmaster.pid, or -1. */
/* Waits (up to 5 s) until pid has died of a signal sent to it: a zombie or
 * gone. kill() only queues the signal; on a loaded machine the process may run
 * on for a moment, and a start in that moment rightly finds it running. */
static void wait_until_dead(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(path, "re");
        if (!f)
            return;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *paren = strrchr(buf, ')');
        if (paren && (paren[2] == 'Z' || paren[2] == 'X'))
            return;
        usleep(10000);
    }
}

static pid_t postmaster_pid(const char *datadir)
{
    char path[4096];
    FILE *f;
    long pid = -1;

    snprintf(path, sizeof path, "%s/postmaster.pid", datadir);
    f = fopen(path, "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld", &pid) != 1)
        pid = -1;
    fclose(f);
    return (pid_t)pid;
}

static void test_lifecycle(void)
{
    crier_pg_cluster_options opts = {.fast = true, .max_connections = 20};
    char base[64], datadir[256], conninfo[1024], again[1024], from_dir[1024], err[4096], val[256];
    pid_t pid;
    double t0;
    int started = 0;

    base[0] = '\0';
    CHECK(make_base(base, sizeof base) == 0, "cannot make a temp dir");
    /* A space in the path exercises conninfo quoting; "nested/" exercises mkdir -p. */
    snprintf(datadir, sizeof datadir, "%s/nested/data dir", base);

    t0 = now_s();
    CHECK(crier_pg_cluster_start(datadir, &opts, conninfo, sizeof conninfo, err, sizeof err) == 0,
          "cold start: %s", err);
    started = 1;
    printf("cold start (initdb + start): %.2fs\n", now_s() - t0);
    printf("conninfo: %s\n", conninfo);
    CHECK(strstr(conninfo, "host='/tmp/crier-pgtest-") == conninfo, "host quoted: %s", conninfo);
    CHECK(strstr(conninfo, "user=crier") && strstr(conninfo, "dbname=postgres") &&
              strstr(conninfo, "port=5432"),
          "conninfo fields: %s", conninfo);
    CHECK(query_value(conninfo, "SELECT 1", val, sizeof val) == 0 && !strcmp(val, "1"), "SELECT 1");
    CHECK(query_value(conninfo, "SHOW fsync", val, sizeof val) == 0 && !strcmp(val, "off"),
          "fsync=%s", val);
    CHECK(query_value(conninfo, "SHOW max_connections", val, sizeof val) == 0 && !strcmp(val, "20"),
          "max_connections=%s", val);
    CHECK(query_value(conninfo, "SHOW listen_addresses", val, sizeof val) == 0 && !strcmp(val, ""),
          "listen_addresses=%s", val);
    CHECK(query_value(conninfo, "SHOW max_wal_size", val, sizeof val) == 0 && !strcmp(val, "4GB"),
          "max_wal_size=%s", val);
    CHECK(query_value(conninfo, "SHOW wal_compression", val, sizeof val) == 0 && !strcmp(val, "pglz"),
          "wal_compression=%s", val);
    CHECK(query_value(conninfo, "SELECT current_user", val, sizeof val) == 0 &&
              !strcmp(val, "crier"),
          "current_user=%s", val);
    CHECK(query_value(conninfo, "CREATE TABLE survives (x int)", val, sizeof val) == 0,
          "create table");

    /* Already running: 0 and the same conninfo. */
    CHECK(crier_pg_cluster_start(datadir, &opts, again, sizeof again, err, sizeof err) == 0,
          "second start: %s", err);
    CHECK(!strcmp(conninfo, again), "same conninfo: %s vs %s", conninfo, again);
    CHECK(crier_pg_cluster_conninfo(datadir, from_dir, sizeof from_dir, err, sizeof err) == 0 &&
              !strcmp(conninfo, from_dir),
          "conninfo(): %s", err);

    /* Too small a buffer is an error, not a truncated string. */
    CHECK(crier_pg_cluster_conninfo(datadir, val, 10, err, sizeof err) == -1 && err[0],
          "small buffer");

    CHECK(crier_pg_cluster_stop(datadir, err, sizeof err) == 0, "stop: %s", err);
    started = 0;
    CHECK(!can_connect(conninfo), "still accepting connections after stop");
    CHECK(crier_pg_cluster_stop(datadir, err, sizeof err) == 0, "stop when stopped: %s", err);

    /* Warm start: reuses the initdb'd directory (the table is still there). */
    t0 = now_s();
    CHECK(crier_pg_cluster_start(datadir, &opts, again, sizeof again, err, sizeof err) == 0,
          "warm start: %s", err);
    started = 1;
    printf("warm start: %.2fs\n", now_s() - t0);
    CHECK(!strcmp(conninfo, again), "same conninfo after restart");
    CHECK(query_value(conninfo, "SELECT count(*) FROM survives", val, sizeof val) == 0 &&
              !strcmp(val, "0"),
          "table survived the restart");

    /* kill -9 of the postmaster leaves a stale postmaster.pid (and, for a while, a
     * zombie postmaster and exiting children): an immediate start must cope. */
    pid = postmaster_pid(datadir);
    CHECK(pid > 1, "postmaster.pid");
    CHECK(kill(pid, SIGKILL) == 0, "kill -9 %d: %s", (int)pid, strerror(errno));
    wait_until_dead(pid);
    t0 = now_s();
    CHECK(crier_pg_cluster_start(datadir, &opts, again, sizeof again, err, sizeof err) == 0,
          "start after kill -9: %s", err);
    printf("start after kill -9: %.2fs\n", now_s() - t0);
    CHECK(postmaster_pid(datadir) != pid, "a new postmaster");
    CHECK(query_value(conninfo, "SELECT 1", val, sizeof val) == 0 && !strcmp(val, "1"),
          "SELECT 1 after kill -9 restart");

    /* kill -9, then stop at once: nothing to stop, and no 60 s wait. */
    pid = postmaster_pid(datadir);
    CHECK(pid > 1, "postmaster.pid");
    CHECK(kill(pid, SIGKILL) == 0, "kill -9 %d: %s", (int)pid, strerror(errno));
    wait_until_dead(pid);
    t0 = now_s();
    CHECK(crier_pg_cluster_stop(datadir, err, sizeof err) == 0, "stop after kill -9: %s", err);
    CHECK(now_s() - t0 < 10, "stop after kill -9 took %.1fs", now_s() - t0);
    CHECK(crier_pg_cluster_start(datadir, &opts, again, sizeof again, err, sizeof err) == 0,
          "start after kill -9 and stop: %s", err);
    CHECK(query_value(conninfo, "SELECT 1", val, sizeof val) == 0 && !strcmp(val, "1"),
          "SELECT 1 after the second kill -9 restart");

    CHECK(crier_pg_cluster_stop(datadir, err, sizeof err) == 0, "final stop: %s", err);
    started = 0;
    CHECK(!can_connect(conninfo), "still accepting connections after final stop");
cleanup:
    if (started)
        crier_pg_cluster_stop(datadir, err, sizeof err);
    if (base[0])
        rm_rf(base);
}

/* A data directory whose socket path would not fit in sun_path (107 bytes). */
static void test_long_path(void)
{
    crier_pg_cluster_options opts = {.fast = true};
    char base[64], datadir[512], conninfo[1024], err[4096], val[64], sockdir[1024];
    struct stat st;
    int started = 0;

    base[0] = '\0';
    CHECK(make_base(base, sizeof base) == 0, "cannot make a temp dir");
    snprintf(datadir, sizeof datadir,
             "%s/a-rather-long-directory-name-for-testing/another-long-directory-name-here/"
             "pgdata-with-a-long-name",
             base);
    CHECK(strlen(datadir) > 110, "path length %zu", strlen(datadir));
    CHECK(crier_pg_cluster_start(datadir, &opts, conninfo, sizeof conninfo, err, sizeof err) == 0,
          "start: %s", err);
    started = 1;
    printf("long path conninfo: %s\n", conninfo);
    CHECK(!strncmp(conninfo, "host=/tmp/crier-pg-", 19), "fallback socket dir: %s", conninfo);
    CHECK(sscanf(conninfo, "host=%1023s", sockdir) == 1 && strlen(sockdir) == 14 + 16, "sockdir %s",
          sockdir);
    CHECK(stat(sockdir, &st) == 0 && (st.st_mode & 0777) == 0700, "sockdir mode %o",
          st.st_mode & 0777);
    CHECK(query_value(conninfo, "SELECT 1", val, sizeof val) == 0 && !strcmp(val, "1"), "SELECT 1");
    CHECK(crier_pg_cluster_stop(datadir, err, sizeof err) == 0, "stop: %s", err);
    started = 0;
    CHECK(!can_connect(conninfo), "still accepting connections after stop");
    CHECK(access(sockdir, F_OK) != 0, "fallback socket dir %s left behind", sockdir);
cleanup:
    if (started)
        crier_pg_cluster_stop(datadir, err, sizeof err);
    if (base[0])
        rm_rf(base);
}

static void restore_env(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

/* Errors: no cluster, binaries missing, unsafe paths, untraversable parents. */
static void test_errors(void)
{
    char base[64], path[256], conninfo[1024], err[4096];
    const char *old_bindir = getenv("CRIER_PG_BINDIR");
    char *saved_bindir = old_bindir ? strdup(old_bindir) : NULL;

    base[0] = '\0';
    CHECK(make_base(base, sizeof base) == 0, "cannot make a temp dir");

    CHECK(crier_pg_cluster_conninfo(base, conninfo, sizeof conninfo, err, sizeof err) == -1 &&
              strstr(err, "no PostgreSQL cluster"),
          "conninfo of an empty dir: %s", err);
    CHECK(crier_pg_cluster_stop(base, err, sizeof err) == 0, "stop of an empty dir: %s", err);
    snprintf(path, sizeof path, "%s/missing", base);
    CHECK(crier_pg_cluster_stop(path, err, sizeof err) == 0, "stop of a missing dir: %s", err);

    setenv("CRIER_PG_BINDIR", "/nonexistent/bin", 1);
    snprintf(path, sizeof path, "%s/nobins", base);
    CHECK(crier_pg_cluster_start(path, NULL, conninfo, sizeof conninfo, err, sizeof err) == -1 &&
              strstr(err, "PostgreSQL server binaries not found"),
          "missing binaries: %s", err);
    restore_env("CRIER_PG_BINDIR", saved_bindir);

    snprintf(path, sizeof path, "%s/stray", base);
    CHECK(mkdir(path, 0700) == 0, "mkdir %s", path);
    snprintf(path, sizeof path, "%s/stray/file", base);
    CHECK(close(open(path, O_WRONLY | O_CREAT, 0600)) == 0, "create %s", path);
    snprintf(path, sizeof path, "%s/stray", base);
    CHECK(crier_pg_cluster_start(path, NULL, conninfo, sizeof conninfo, err, sizeof err) == -1 &&
              strstr(err, "not empty"),
          "non-empty dir without a cluster: %s", err);

    snprintf(path, sizeof path, "%s/bad$dir", base);
    CHECK(crier_pg_cluster_start(path, NULL, conninfo, sizeof conninfo, err, sizeof err) == -1 &&
              strstr(err, "shell"),
          "unsafe path: %s", err);

    if (geteuid() == 0) {
        /* A parent the server user cannot enter, not created by us: clear error. */
        snprintf(path, sizeof path, "%s/closed", base);
        CHECK(mkdir(path, 0700) == 0, "mkdir %s", path);
        snprintf(path, sizeof path, "%s/closed/pg", base);
        CHECK(crier_pg_cluster_start(path, NULL, conninfo, sizeof conninfo, err, sizeof err) ==
                      -1 &&
                  strstr(err, "cannot enter directory") && strstr(err, "/closed"),
              "untraversable parent: %s", err);
    }
cleanup:
    restore_env("CRIER_PG_BINDIR", saved_bindir);
    free(saved_bindir);
    if (base[0])
        rm_rf(base);
}

int main(void)
{
    test_errors();
    test_lifecycle();
    test_long_path();
    if (failures) {
        fprintf(stderr, "test_pg_cluster: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_pg_cluster: ok\n");
    return 0;
}
