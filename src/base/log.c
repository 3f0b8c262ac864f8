/* log.c — leveled logging to stderr (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static crier_log_level log_min_level = CRIER_LOG_INFO;

void crier_log_set_level(crier_log_level level)
{
    log_min_level = level;
}

void crier_log_init_from_env(void)
{
    const char *v = getenv("CRIER_LOG");
    if (!v)
        return;
    if (!strcasecmp(v, "debug"))
        log_min_level = CRIER_LOG_DEBUG;
    else if (!strcasecmp(v, "info"))
        log_min_level = CRIER_LOG_INFO;
    else if (!strcasecmp(v, "warn"))
        log_min_level = CRIER_LOG_WARN;
    else if (!strcasecmp(v, "error"))
        log_min_level = CRIER_LOG_ERROR;
}

void crier_log(crier_log_level level, const char *module, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    char line[4096];
    int n;
    va_list ap;

    if (level < log_min_level)
        return;
    n = snprintf(line, sizeof line, "crier[%d] %s %s: ", (int)getpid(), names[level], module);
    if (n < 0 || (size_t)n >= sizeof line)
        return;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    n = (int)strlen(line);
    if ((size_t)n < sizeof line - 1) {
        line[n++] = '\n';
        line[n] = '\0';
    } else {
        line[sizeof line - 2] = '\n';
    }
    fputs(line, stderr);
}

void crier_set_error(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    if (!err || err_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}
