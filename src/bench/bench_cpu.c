/* bench_cpu.c — CPU time of this process and of a local PostgreSQL server (see bench_cpu.h). */
#include "bench_cpu.h"
#include "proc_stat.h"

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

double crier_bench_rusage_s(const struct rusage *ru)
{
    return (double)ru->ru_utime.tv_sec + ru->ru_utime.tv_usec / 1e6 + (double)ru->ru_stime.tv_sec +
           ru->ru_stime.tv_usec / 1e6;
}

double crier_bench_self_cpu_s(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) < 0 ? NAN : crier_bench_rusage_s(&ru);
}

pid_t crier_bench_server_pid(PGconn *conn)
{
    PGresult *res = PQexec(conn, "SELECT pg_backend_pid(), current_setting('data_directory')");
    pid_t pid = 0;
    crier_proc_stat st;
    char cwd_link[64], cwd[PATH_MAX], data_dir[PATH_MAX];

    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        PQclear(res);
        return 0;
    }
    pid_t backend = (pid_t)atoi(PQgetvalue(res, 0, 0));
    /* the data directory as the server names it, resolved as the postmaster's cwd is */
    if (!realpath(PQgetvalue(res, 0, 1), data_dir))
        snprintf(data_dir, sizeof data_dir, "%s", PQgetvalue(res, 0, 1));
    PQclear(res);
    if (crier_proc_stat_read(backend, &st) < 0 || st.ppid <= 1)
        return 0;
    snprintf(cwd_link, sizeof cwd_link, "/proc/%d/cwd", (int)st.ppid);
    ssize_t n = readlink(cwd_link, cwd, sizeof cwd - 1);
    if (n <= 0)
        return 0;
    cwd[n] = '\0';
    if (strcmp(cwd, data_dir) == 0)
        pid = st.ppid;
    return pid;
}

/* Sums the live children of postmaster (utime + stime) and counts them. */
static int sum_children(pid_t postmaster, unsigned long long *ticks, unsigned long long *pid_sum)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    *ticks = 0;
    *pid_sum = 0;
    while ((e = readdir(d)) != NULL) {
        crier_proc_stat st;
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        pid_t pid = (pid_t)atoi(e->d_name);
        if (crier_proc_stat_read(pid, &st) < 0 || st.ppid != postmaster)
            continue;
        *ticks += st.utime + st.stime;
        *pid_sum += (unsigned long long)pid;
        n++;
    }
    closedir(d);
    return n;
}

double crier_bench_server_cpu_s(pid_t postmaster)
{
    double hz = (double)sysconf(_SC_CLK_TCK);
    if (postmaster <= 0 || !(hz > 0))
        return NAN;
    for (int tries = 0; tries < 20; tries++) {
        unsigned long long before_ticks, before_pids, after_ticks, after_pids;
        crier_proc_stat pm;
        int n1 = sum_children(postmaster, &before_ticks, &before_pids);
        if (n1 < 0 || crier_proc_stat_read(postmaster, &pm) < 0)
            return NAN;
        int n2 = sum_children(postmaster, &after_ticks, &after_pids);
        if (n2 != n1 || after_pids != before_pids)
            continue; /* a child came or went between the readings: read again */
        return (double)(pm.utime + pm.stime + pm.cutime + pm.cstime + after_ticks) / hz;
    }
    return NAN;
}
