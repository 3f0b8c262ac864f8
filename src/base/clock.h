/* clock.h — the monotonic clock, for durations and deadlines (never for
 * timestamps that leave the process).
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: nothing of crier's.
 */
#ifndef CRIER_CLOCK_H
#define CRIER_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock. */
static inline double crier_clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Milliseconds on the monotonic clock. */
static inline double crier_clock_ms(void)
{
    return crier_clock_s() * 1000.0;
}

#endif
