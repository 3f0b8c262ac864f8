/* log.c — leveled logging to stderr (see log.h). */
#include "log.h"

#include "json_writer.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static crier_log_level log_min_level = CRIER_LOG_INFO;
static bool log_json;

void crier_log_set_level(crier_log_level level)
{
    log_min_level = level;
}

void crier_log_init_from_env(void)
{
    const char *v = getenv("CRIER_LOG_FORMAT");
    log_json = v && !strcasecmp(v, "json");
    v = getenv("CRIER_LOG");
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

/* The ids a message names ("event 12", "delivery 7", "notification 3",
 * "digest 2", "timer 5" — the ids crier status, crier dead and the API show)
 * and its notification key ("key invoice.created:inv_1:alice"), added to a
 * JSON line as fields: the first of each. */
static void log_json_ids(crier_json_buf *b, const char *msg)
{
    static const char *const names[] = {"event", "delivery", "notification", "digest", "timer"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t len = strlen(names[i]);
        for (const char *p = strstr(msg, names[i]); p; p = strstr(p + 1, names[i])) {
            const char *d = p + len;
            if ((p > msg && isalnum((unsigned char)p[-1])) || *d != ' ' || !isdigit((unsigned char)d[1]))
                continue;
            long long id = strtoll(d + 1, NULL, 10);
            crier_json_buf_printf(b, ",\"%s_id\":%lld", names[i], id);
            break;
        }
    }
    const char *k = strstr(msg, "key ");
    if (k && (k == msg || k[-1] == ' ' || k[-1] == '(')) {
        size_t n = strcspn(k + 4, " ,;)");
        if (n > 0 && memchr(k + 4, ':', n)) {
            char key[512];
            snprintf(key, sizeof key, "%.*s", (int)(n < sizeof key ? n : sizeof key - 1), k + 4);
            crier_json_buf_puts(b, ",\"key\":");
            crier_json_buf_string(b, key);
        }
    }
}

/* One JSON object per line: time (UTC, milliseconds), level, pid, module,
 * msg, and the ids the message names. */
static void log_json_line(crier_log_level level, const char *module, const char *msg)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    crier_json_buf b = {0};
    struct timeval tv;
    struct tm tm;
    char when[40];

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    crier_json_buf_printf(&b, "{\"time\":\"%s.%03dZ\",\"level\":\"%s\",\"pid\":%d,\"module\":", when,
                          (int)(tv.tv_usec / 1000), names[level], (int)getpid());
    crier_json_buf_string(&b, module);
    crier_json_buf_puts(&b, ",\"msg\":");
    crier_json_buf_string(&b, msg);
    log_json_ids(&b, msg);
    crier_json_buf_puts(&b, "}\n");
    if (b.data)
        fwrite(b.data, 1, b.len, stderr);
    crier_json_buf_free(&b);
}

void crier_log(crier_log_level level, const char *module, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    char line[4096];
    int n;
    va_list ap;

    if (level < log_min_level)
        return;
    if (log_json) {
        va_start(ap, fmt);
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
        log_json_line(level, module, line);
        return;
    }
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
