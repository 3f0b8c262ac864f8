/* proc_stat.h — one process's /proc/PID/stat (Linux): its state, its parent
 * and its CPU times.
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: nothing of crier's.
 */
#ifndef CRIER_PROC_STAT_H
#define CRIER_PROC_STAT_H

#include <sys/types.h>

typedef struct {
    char state;  /* R, S, D, Z (zombie), X (dead), … */
    pid_t ppid;
    /* clock ticks (sysconf(_SC_CLK_TCK)): the process's own user and system
     * time, and that of its children it has waited for */
    unsigned long long utime, stime, cutime, cstime;
} crier_proc_stat;

/* Reads /proc/PID/stat. Returns 0; -1 when it cannot be opened (no such
 * process, or no /proc); -2 when it cannot be parsed. */
int crier_proc_stat_read(pid_t pid, crier_proc_stat *st);

#endif
