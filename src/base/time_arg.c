/* time_arg.c — durations ago as timestamps, RFC 3339 checks (see time_arg.h). */
#include "time_arg.h"

#include <stdlib.h>
#include <string.h>
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

/* Reads n digits at *p into *v; false when one is not a digit. */
static bool time_digits(const char **p, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (**p < '0' || **p > '9')
            return false;
        *v = *v * 10 + (**p - '0');
    }
    return true;
}

bool crier_time_rfc3339_valid(const char *s)
{
    static const int days[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const char *p = s;
    int y, mo, d, h, mi, sec, oh, om;
    if (!s || !time_digits(&p, 4, &y) || *p++ != '-' || !time_digits(&p, 2, &mo) || *p++ != '-' ||
        !time_digits(&p, 2, &d) || (*p != 'T' && *p != 't' && *p != ' '))
        return false;
    p++;
    if (!time_digits(&p, 2, &h) || *p++ != ':' || !time_digits(&p, 2, &mi) || *p++ != ':' ||
        !time_digits(&p, 2, &sec))
        return false;
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > days[mo - 1] || h > 23 || mi > 59 || sec > 59)
        return false;
    if (mo == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
        return false;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if ((*p == 'Z' || *p == 'z') && !p[1])
        return true;
    if (*p != '+' && *p != '-')
        return false;
    p++;
    return time_digits(&p, 2, &oh) && *p++ == ':' && time_digits(&p, 2, &om) && !*p && oh <= 23 && om <= 59;
}

const char *crier_time_not_before(const char *arg, char *buf, size_t len)
{
    char *end;
    double v, unit;
    if (!arg)
        return NULL;
    if (arg[0] != '+')
        return crier_time_rfc3339_valid(arg) ? arg : NULL;
    if (arg[1] < '0' || arg[1] > '9')
        return NULL;
    v = strtod(arg + 1, &end);
    if (end == arg + 1 || !(v >= 0 && v < 1e9) || !*end || end[1])
        return NULL;
    unit = *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600 : *end == 'd' ? 86400 : 0;
    if (unit == 0)
        return NULL;
    time_t t = time(NULL) + (time_t)(v * unit);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}
