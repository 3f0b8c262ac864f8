/* log.h — leveled logging to stderr, one line per message, for every module.
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: json_writer.
 */
#ifndef CRIER_LOG_H
#define CRIER_LOG_H

#include <stddef.h>

typedef enum { CRIER_LOG_DEBUG = 0, CRIER_LOG_INFO, CRIER_LOG_WARN, CRIER_LOG_ERROR } crier_log_level;

/* Sets the lowest level that is printed (default INFO; main.c sets WARN for
 * the commands other than serve, before crier_log_init_from_env). */
void crier_log_set_level(crier_log_level level);
/* Reads CRIER_LOG (debug|info|warn|error) from the environment, if set: it
 * overrides the level set before; and CRIER_LOG_FORMAT (json: one JSON object
 * per line — time, level, pid, module, msg, and the ids the message names as
 * event_id, delivery_id, notification_id, digest_id, timer_id and key). */
void crier_log_init_from_env(void);
/* Prints "crier[pid] LEVEL module: message" to stderr when level is enabled
 * (or its JSON object, with CRIER_LOG_FORMAT=json). */
void crier_log(crier_log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Formats an error message into the caller's buffer err (err_len bytes,
 * truncated to fit); NULL or empty buffers are ignored. */
void crier_set_error(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define crier_debug(mod, ...) crier_log(CRIER_LOG_DEBUG, mod, __VA_ARGS__)
#define crier_info(mod, ...) crier_log(CRIER_LOG_INFO, mod, __VA_ARGS__)
#define crier_warn(mod, ...) crier_log(CRIER_LOG_WARN, mod, __VA_ARGS__)
#define crier_error(mod, ...) crier_log(CRIER_LOG_ERROR, mod, __VA_ARGS__)

#endif
