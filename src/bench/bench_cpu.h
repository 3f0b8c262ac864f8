/* bench_cpu.h — the CPU time a benchmark attributes to each part of what it
 * measures: this process, and the processes of a PostgreSQL server that runs
 * on this machine (postmaster, backends, background workers, and those that
 * exited meanwhile), read from /proc. Children the bench starts itself are
 * measured when they are reaped (crier_bench_wait_cpu, bench_util.h).
 *
 * Layer: bench (src/bench/), may use cli and every layer below it.
 * Calls into: proc_stat (base), libpq.
 */
#ifndef CRIER_BENCH_CPU_H
#define CRIER_BENCH_CPU_H

#include <libpq-fe.h>
#include <sys/resource.h>
#include <sys/types.h>

/* User + system CPU seconds of a resource usage (getrusage, wait4). */
double crier_bench_rusage_s(const struct rusage *ru);

/* User + system CPU seconds of this process so far (all its threads). */
double crier_bench_self_cpu_s(void);

/* The postmaster of conn's server when it runs on this machine and this
 * process may read it in /proc: the parent of conn's backend, whose working
 * directory is the server's data directory (so a remote server whose backend
 * pid happens to exist here is not mistaken for it). Returns the pid, or 0
 * when not (then the server's CPU is not measured: a remote server, or a role
 * that may not read data_directory). */
pid_t crier_bench_server_pid(PGconn *conn);

/* CPU seconds (user + system) used so far by the server whose postmaster is
 * pid: the postmaster's own, its live children's, and those of its children
 * that exited and were reaped. Read twice over until no child exited in
 * between, so a backend that exits meanwhile counts once. NAN if unreadable. */
double crier_bench_server_cpu_s(pid_t postmaster);

#endif
