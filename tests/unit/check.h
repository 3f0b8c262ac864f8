/* check.h — the tiny assertion macros of the C unit tests: CHECK records a
 * failure with file and line and goes on; CHECK_DONE returns the exit status. */
#ifndef CRIER_TEST_CHECK_H
#define CRIER_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);              \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_STR(actual, expected)                                                                \
    do {                                                                                           \
        const char *a_ = (actual), *e_ = (expected);                                               \
        if (!a_ || strcmp(a_, e_) != 0) {                                                          \
            fprintf(stderr, "%s:%d: expected \"%s\", got \"%s\"\n", __FILE__, __LINE__, e_,        \
                    a_ ? a_ : "(null)");                                                           \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_DONE()                                                                               \
    (check_failures ? (fprintf(stderr, "%d check(s) failed\n", check_failures), 1)                 \
                    : (printf("all checks passed\n"), 0))

#endif
