/* sd_notify.h — tells a service manager (systemd, Type=notify) how the daemon
 * is doing, over the datagram socket that NOTIFY_SOCKET names, without
 * libsystemd: "READY=1" once it serves, "RELOADING=1" then "READY=1" around a
 * rules reload, "STOPPING=1", "STATUS=…" for systemctl status, and
 * "WATCHDOG=1" pings when WATCHDOG_USEC asks for them (the protocol:
 * sd_notify(3), "Notes").
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: log.
 */
#ifndef CRIER_SD_NOTIFY_H
#define CRIER_SD_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>

/* Takes NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID from the environment
 * and removes them from it, so that child processes (the embedded
 * PostgreSQL speaks the same protocol) never notify in crier's name. Call
 * early, before any child starts; later calls keep what the first one took.
 * Not thread-safe (startup only). Returns whether a service manager listens. */
bool crier_sd_notify_init(void);

/* Sends state (newline-separated VARIABLE=VALUE assignments, e.g.
 * "READY=1\nSTATUS=running") to the service manager crier_sd_notify_init
 * found. Returns 0 when sent or when none listens (nothing to do), -1 with
 * err set when the send failed. */
int crier_sd_notify(const char *state, char *err, size_t err_len);

/* Sends state to the datagram socket named socket_name: a path ("/run/…") or
 * an abstract name ("@…"). Returns 0, or -1 with err set. */
int crier_sd_notify_to(const char *socket_name, const char *state, char *err, size_t err_len);

/* The watchdog timeout the service manager set for this process, in seconds
 * (0: none); ping at least twice per timeout. */
double crier_sd_watchdog_timeout(void);

#endif
