/* time_arg.c — durations ago as timestamps (see time_arg.h). */
#include "time_arg.h"

#include <stdlib.h>
#include <time.h>

const char *crier_time_arg(const char *arg, char *buf, size_t len)
{
    char *end;
    double v, unit = 0;
    if (!arg)
        return NULL;
    v = strtod(arg, &end);
    if (end != arg && v >= 0 && v < 1e9) {
        if (!*end)
            unit = 1;
        else if (!end[1])
            unit = *end == 's'   ? 1
                   : *end == 'm' ? 60
                   : *end == 'h' ? 3600
                   : *end == 'd' ? 86400
                                 : 0;
    }
    if (unit == 0)
        return arg;
    time_t t = time(NULL) - (time_t)(v * unit);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S+00", &tm);
    return buf;
}
