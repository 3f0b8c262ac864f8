/* test_decimal.c — an integer's decimal text without printf: the same bytes
 * as printf's %lld for the edges of int64 and for random values. */
#include "check.h"
#include "decimal.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>

static void check_one(int64_t v)
{
    char got[CRIER_DECIMAL_MAX], want[32];
    size_t len = crier_decimal_int64(got, v);
    snprintf(want, sizeof want, "%" PRId64, v);
    CHECK_STR(got, want);
    CHECK(len == strlen(want));
}

int main(void)
{
    static const int64_t edges[] = {0, 1, -1, 9, 10, -10, 99, 100, 1234567890, -1234567890,
                                    INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1,
                                    9007199254740991, -9007199254740991};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        check_one(edges[i]);
    srand(12345);
    for (int i = 0; i < 100000; i++) {
        uint64_t r = ((uint64_t)rand() << 42) ^ ((uint64_t)rand() << 21) ^ (uint64_t)rand();
        int shift = rand() % 64;
        check_one((int64_t)(r >> shift) * (rand() % 2 ? 1 : -1));
    }
    char buf[CRIER_DECIMAL_MAX];
    CHECK(crier_decimal_int64(buf, INT64_MIN) == CRIER_DECIMAL_MAX - 1); /* the longest fits */
    return CHECK_DONE();
}
