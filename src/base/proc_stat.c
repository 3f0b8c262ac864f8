/* proc_stat.c — reads /proc/PID/stat (see proc_stat.h). */
#include "proc_stat.h"

#include <stdio.h>
#include <string.h>

int crier_proc_stat_read(pid_t pid, crier_proc_stat *st)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) state ppid …": comm may hold spaces and parentheses; the fields
     * resume after its last ')'. utime is field 14, stime 15, cutime 16, cstime 17. */
    const char *p = strrchr(buf, ')');
    int ppid;
    long long skip;
    if (!p || sscanf(p + 1, " %c %d %lld %lld %lld %lld %lld %lld %lld %lld %lld %llu %llu %llu %llu", &st->state,
                     &ppid, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &st->utime, &st->stime,
                     &st->cutime, &st->cstime) != 15)
        return -2;
    st->ppid = (pid_t)ppid;
    return 0;
}
