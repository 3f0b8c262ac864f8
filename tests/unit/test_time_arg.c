/* test_time_arg.c — the "not before" times of scheduled sends: the strict RFC
 * 3339 check of POST /v1/events and crier emit, and the CLI's "+10m" form. */
#define _GNU_SOURCE /* strptime, timegm */
#include "check.h"
#include "time_arg.h"

#include <stdlib.h>
#include <time.h>

int main(void)
{
    static const char *const good[] = {
        "2026-12-03T16:10:00Z", "2026-12-03t16:10:00z", "2026-12-03 16:10:00+01:00",
        "2026-12-03T16:10:00.123456-05:30", "2024-02-29T00:00:00Z", "2000-02-29T23:59:59+14:00",
    };
    static const char *const bad[] = {
        "", "2026-12-03", "2026-12-03T16:10:00", "2026-12-03T16:10Z", "2026-13-01T00:00:00Z",
        "2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-12-03T24:00:00Z",
        "2026-12-03T16:60:00Z", "2026-12-03T16:10:60Z", "2026-12-03T16:10:00+0100", "2026-12-03T16:10:00+24:00",
        "2026-12-03T16:10:00.Z", "2026-12-03T16:10:00Z ", "tomorrow", "now", "infinity", "+10m",
        "2026-12-03X16:10:00Z", "0000-01-01T00:00:00Z",
    };
    char buf[64];
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        CHECK(crier_time_rfc3339_valid(good[i]));
        CHECK_STR(crier_time_not_before(good[i], buf, sizeof buf), good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (crier_time_rfc3339_valid(bad[i])) {
            fprintf(stderr, "accepted: '%s'\n", bad[i]);
            check_failures++;
        }
    CHECK(!crier_time_rfc3339_valid(NULL));

    /* relative: from now, as RFC 3339 UTC */
    time_t before = time(NULL);
    const char *t = crier_time_not_before("+10m", buf, sizeof buf);
    CHECK(t == buf);
    CHECK(t && crier_time_rfc3339_valid(t));
    struct tm tm = {0};
    CHECK(t && strptime(t, "%Y-%m-%dT%H:%M:%SZ", &tm));
    time_t at = timegm(&tm);
    CHECK(at >= before + 600 && at <= time(NULL) + 600);
    CHECK(crier_time_not_before("+2h", buf, sizeof buf) == buf);
    CHECK(crier_time_not_before("+1d", buf, sizeof buf) == buf);
    CHECK(crier_time_not_before("+30s", buf, sizeof buf) == buf);
    static const char *const bad_rel[] = {"+", "+m", "+10", "+10x", "+10mm", "+-5m", "10m", "+ 5m"};
    for (size_t i = 0; i < sizeof bad_rel / sizeof *bad_rel; i++)
        if (crier_time_not_before(bad_rel[i], buf, sizeof buf)) {
            fprintf(stderr, "accepted: '%s'\n", bad_rel[i]);
            check_failures++;
        }
    return CHECK_DONE();
}
