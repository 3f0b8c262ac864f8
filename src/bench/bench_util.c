/* bench_util.c — what the benchmarks share (see bench_util.h). */
#define _GNU_SOURCE
#include "bench_util.h"
#include "bench_cpu.h"
#include "alloc.h"
#include "clock.h"

#include "cli.h"
#include "migrate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double crier_bench_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void crier_bench_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

double crier_bench_load(void)
{
    double load = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1)
            load = NAN;
        fclose(f);
    }
    return load;
}

int crier_bench_open_database(const char *database, const char *data_dir, crier_database *db,
                              const char *dbname, bool reuse, bool rebuild, const char *tenant,
                              char *conninfo, size_t len, PGconn **conn, bool *fresh)
{
    char err[4096], sql[512];
    double v[1];

    *fresh = false;
    if (crier_database_open(database, data_dir, false, db, err, sizeof err) < 0) {
        crier_cli_error("bench", "%s", err);
        return -1;
    }
    snprintf(conninfo, len, "%s", db->conninfo);
    if (db->embedded) { /* as the superuser: the benchmarks load extensions and reset statistics */
        PGconn *admin = PQconnectdb(db->admin_conninfo);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_database WHERE datname = '%s'", dbname);
        int ok = PQstatus(admin) == CONNECTION_OK &&
                 crier_bench_exec(admin, "SET client_min_messages = warning") == 0 &&
                 crier_bench_query_numbers(admin, sql, v, 1) == 0;
        if (ok && v[0] == 1 && (!reuse || rebuild)) {
            snprintf(sql, sizeof sql, "DROP DATABASE %s WITH (FORCE)", dbname);
            ok = crier_bench_exec(admin, sql) == 0;
            v[0] = 0;
        }
        if (ok && v[0] == 0) {
            snprintf(sql, sizeof sql, "CREATE DATABASE %s", dbname);
            ok = crier_bench_exec(admin, sql) == 0;
            *fresh = true;
        }
        if (!ok)
            crier_cli_error("bench", "cannot create database %s: %s", dbname, PQerrorMessage(admin));
        PQfinish(admin);
        if (!ok)
            return -1;
        snprintf(conninfo, len, "%s dbname=%s", db->admin_conninfo, dbname);
    }
    if (crier_migrate_run(conninfo, NULL, err, sizeof err) < 0) {
        crier_cli_error("bench", "%s%s", err,
                        db->embedded && reuse && !*fresh
                            ? " (--rebuild starts again from a fresh database)"
                            : "");
        return -1;
    }
    *conn = PQconnectdb(conninfo);
    if (PQstatus(*conn) != CONNECTION_OK) {
        crier_cli_error("bench", "cannot connect: %s", PQerrorMessage(*conn));
        return -1;
    }
    const char *values[1] = {tenant};
    PGresult *res = PQexecParams(*conn, "SELECT count(*) FROM crier.events WHERE tenant <> $1", 1, NULL,
                                 values, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        crier_cli_error("bench", "%s", PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    long other = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (other > 0) {
        crier_cli_error("bench",
                        "the database holds %ld events of other tenants; the bench empties crier's "
                        "tables, so point --database at a throwaway database",
                        other);
        return -1;
    }
    return crier_bench_exec(*conn, "SET client_min_messages = warning");
}

int crier_bench_exec(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok)
        crier_cli_error("bench", "%s: %s", sql, PQresultErrorMessage(res));
    PQclear(res);
    return ok ? 0 : -1;
}

int crier_bench_query_numbers(PGconn *conn, const char *sql, double *out, int n)
{
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) < n) {
        crier_cli_error("bench", "%s: %s", sql, PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    for (int i = 0; i < n; i++)
        out[i] = PQgetisnull(res, 0, i) ? NAN : strtod(PQgetvalue(res, 0, i), NULL);
    PQclear(res);
    return 0;
}

int crier_bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void crier_bench_stats(const double *v, int n, double *med, double *lo, double *hi)
{
    double *s = crier_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(v[i]))
            s[k++] = v[i];
    qsort(s, (size_t)k, sizeof *s, crier_bench_cmp_double);
    *med = k == 0 ? NAN : k % 2 ? s[k / 2] : (s[k / 2 - 1] + s[k / 2]) / 2;
    *lo = k ? s[0] : NAN;
    *hi = k ? s[k - 1] : NAN;
    free(s);
}

double crier_bench_quantile(const double *v, size_t n, double p)
{
    size_t rank = (size_t)ceil(p * (double)n);
    return n == 0 ? NAN : v[rank > 0 ? rank - 1 : 0];
}

double crier_bench_histogram_quantile(const double *le, const double *before, const double *after, int n,
                                      double q)
{
    double total = 0, cum = 0, lower = 0;
    for (int i = 0; i < n; i++)
        total += after[i] - before[i];
    if (total <= 0)
        return NAN;
    for (int i = 0; i < n; i++) {
        double k = after[i] - before[i];
        if (k > 0 && cum + k >= q * total)
            return isinf(le[i]) ? lower : lower + (le[i] - lower) * (q * total - cum) / k;
        cum += k;
        if (!isinf(le[i]))
            lower = le[i];
    }
    return lower;
}

/* ------------------------------------------------------------------------ */
/* Child processes */

int crier_bench_serve_argv(char **argv, const char *conninfo, const char *rules_dir, const char *lua_dir)
{
    int n = 0;
    argv[n++] = "/proc/self/exe";
    argv[n++] = "serve";
    argv[n++] = "--database";
    argv[n++] = (char *)conninfo;
    argv[n++] = "--rules";
    argv[n++] = (char *)rules_dir;
    argv[n++] = "--lua-dir";
    argv[n++] = (char *)lua_dir;
    argv[n++] = "--no-migrate";
    argv[n++] = "--allow-targets";
    argv[n++] = "loopback";
    return n;
}

pid_t crier_bench_spawn(char *const argv[], const char *log_path)
{
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_t pid;

    if (fd < 0) {
        crier_cli_error("bench", "cannot create %s: %s", log_path, strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(127);
        close_range(3, ~0U, 0);
        execv(argv[0], argv);
        dprintf(2, "crier bench: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fd);
    if (pid < 0)
        crier_cli_error("bench", "fork: %s", strerror(errno));
    return pid;
}

int crier_bench_wait(pid_t pid, double timeout_s)
{
    return crier_bench_wait_cpu(pid, timeout_s, NULL);
}

int crier_bench_wait_cpu(pid_t pid, double timeout_s, double *cpu_s)
{
    double until = crier_clock_s() + timeout_s;
    int status;
    struct rusage ru;

    for (;;) {
        pid_t r = wait4(pid, &status, WNOHANG, &ru);
        if (r == pid) {
            if (cpu_s)
                *cpu_s += crier_bench_rusage_s(&ru);
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        if (r < 0 && errno != EINTR)
            return 255;
        if (crier_clock_s() >= until)
            return -1;
        crier_bench_sleep(0.005);
    }
}

int crier_bench_stop_child(pid_t *pid, double grace_s)
{
    return crier_bench_stop_child_cpu(pid, grace_s, NULL);
}

int crier_bench_stop_child_cpu(pid_t *pid, double grace_s, double *cpu_s)
{
    int rc;
    if (*pid <= 0)
        return 0;
    kill(*pid, SIGTERM);
    rc = crier_bench_wait_cpu(*pid, grace_s, cpu_s);
    if (rc < 0) {
        kill(*pid, SIGKILL);
        rc = crier_bench_wait_cpu(*pid, 10, cpu_s);
    }
    *pid = 0;
    return rc;
}

void crier_bench_print_tail(const char *path)
{
    char *text = crier_cli_read_file(path);
    if (!text)
        return;
    size_t len = strlen(text);
    const char *start = len > 2000 ? text + len - 2000 : text;
    fprintf(stderr, "--- %s (tail) ---\n%s%s", path, start,
            len && text[len - 1] != '\n' ? "\n" : "");
    free(text);
}

int crier_bench_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

bool crier_bench_port_open(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

int crier_bench_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok)
        crier_cli_error("bench", "cannot write %s: %s", path, strerror(errno));
    return ok ? 0 : -1;
}

static int bench_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void crier_bench_rm_tree(const char *dir)
{
    nftw(dir, bench_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
